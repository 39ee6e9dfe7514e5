"""`python -m ferry ...` is the `ferry` command: info, keygen, check, models."""

from ferry._bin import ferry

ferry()
