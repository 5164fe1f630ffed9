"""The catalogue SQL: schema, views and analysts' example queries, shipped as package data."""
