-- Make a catalog the default: the statements after it read and write its tables.
USE {{ identifier(catalog) }};
