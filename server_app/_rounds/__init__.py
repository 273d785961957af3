"""Rounds: the manager that opens them and admits their stage messages, the one facade the
routes call (``_manager``); closing stages and ending rounds (``_closing``); their status
(``_status``); a live round's decoded spec and server half (``_lookup``); what is recorded
beside its protocol state (``_records``); and the long polls that hand members their work
(``_work``).
"""
