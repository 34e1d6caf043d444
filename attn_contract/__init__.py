"""The attention-backend contract: the one package both the harness core and every backend import.

Nothing else crosses between ``harness`` and ``backends``: capabilities, common metadata, the
builder/impl/backend bases, cell statuses and the LSE merge op all live here.
"""
