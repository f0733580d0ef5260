"""The language_model example (see README.md beside this file)."""
