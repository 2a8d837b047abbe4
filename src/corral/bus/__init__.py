"""NATS: the connection (reconnect forever, link state: `client`), how it authenticates and encrypts
(`security`, `natsauth`: JWT and nkeys), subject builders that cannot be injected (`subjects`), and the typed
payloads with the reference's JSON names (`messages`, `agent_messages`). It decides nothing.
"""
