"""One cell (case x backend x variant) -> one checked, timed result row."""
