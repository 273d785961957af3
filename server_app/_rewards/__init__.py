"""The reward path: the broker that asks members to score, by push or pull (``_broker``),
the broker as the selection layer's reward source (``_broker_source``) and the
aligner's reward service, the selection pipeline on the server (``_service``).
"""
