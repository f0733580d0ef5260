"""synergyd: the gRPC scheduler daemon around the pure scheduling core."""
