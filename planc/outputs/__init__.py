"""Text outputs (explain, diff, the memory report) and how outputs are written (atomic files, progress)."""
