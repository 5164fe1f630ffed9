"""The records room: op records, the expression language, the names a layer reads, the settings grid and both pricing paths."""
