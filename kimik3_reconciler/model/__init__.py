"""Frozen values with no I/O: the profile, facts, plans, step payloads, the quant catalog and the pin table."""
