"""The admin API (`/api/nodes/*`, models, scheduling, keys, settings, activity, events): one module per
resource; `app` wires admin and API-key access into the application.
"""
