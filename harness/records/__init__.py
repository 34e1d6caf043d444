"""What a run leaves: rows, run.json, their formats, merging, export and atomic files."""
