"""Rounds: the manager that opens them and admits their stage messages, the one facade the
routes call (``_manager``); closing stages and ending rounds (``_closing``); what the server
knows of a round beside its store rows, a live round's decoded spec and server half, its
records (DP, refusals, who left) and its status (``_state``); and the long polls that hand
members their work (``_work``).
"""
