"""The worker process side of a local run: its loop, its messages, its imports."""
