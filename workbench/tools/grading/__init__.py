"""Grading a class: reading submissions, running each in a sandbox, the gradebook."""
