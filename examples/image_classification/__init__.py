"""The image_classification example (see README.md beside this file)."""
