-- What `speccat fit` lists (flows/fit_engine.py): the macro fitting_sets at every layout of the
-- table it registers, in the macro's order.
SELECT * FROM fitting_sets({{ literal(layouts) }});
