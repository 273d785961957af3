"""The consortium's router at run time: its lineages and the router terms every round
opens with (``_config``), and the router the reward service serves (``_serving``).
"""
