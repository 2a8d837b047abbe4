"""Tenancy: who is calling (tenant, key, priority class) and what they used — pure data and bookkeeping that
the frontend sets per request and routing reads (the queue's fairness, usage accounting)."""
