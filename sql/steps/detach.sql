-- Detach a catalog this connection attached.
DETACH {{ identifier(catalog) }};
