"""The dali example (see README.md beside this file)."""
