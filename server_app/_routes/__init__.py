"""The REST routes, one module per group of endpoints: each declares its callers' roles,
names the caller (``_identity._access``) and hands the request to the part below that
does the work (``_rounds`` also holds what each role may read of a round). No part below
the routes imports one.
"""
