"""Running a plan (``runner``: ``Runner(plan).run(reporter)``) and placing its cases on workers: in-process,
worker processes, a Ray cluster."""
