"""`speccat report OUT/`: a static site drawn from the catalogue's views (docs/report.md).

    data.py      reads the catalogue through sql/report/*.sql, one catalogue-wide query per
                 setting, and splits the rows by repo
    readable.py  settings, layouts, bytes and counts as people read them
    figures.py   the plots, as plotly figure dicts, each from rows of one query
    site.py      the pages: index, one per model, compare, changes, truth; plotly.min.js copied
                 beside them, so the site opens from disk with no network
"""
