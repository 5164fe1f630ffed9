"""What the tests share: stand-ins, hand-built specs, runs of the night and their fixtures."""
