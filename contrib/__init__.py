"""Optional extension plugins shipped with Antler."""
