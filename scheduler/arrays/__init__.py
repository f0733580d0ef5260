"""CODA's multi-array scheduling (CODA §V-C): CPU-only jobs as an array of their own."""
