"""Small offline agents that ship with oma-bridge, for trying the daemon without a key.

:mod:`oma_bridge.demo.acp_agent` is a real ACP v1 agent (the embedded default
config's ``demo`` profile): ``python -m oma_bridge.demo.acp_agent``.
"""
