"""Helpers the tests share: typed rows to build results from (typed_rows), sampled runs for the
gate (sampled_rows), the report page in a headless browser (browser_page). tests/ is on sys.path
through pytest (rootdir-relative imports), so they import as ``helpers.NAME``."""
