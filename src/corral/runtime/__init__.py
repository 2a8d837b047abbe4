"""Process plumbing every corral command shares: periodic loops and the tasks a process owns
(`loops`), the event-loop stall watch (`loopwatch`), the embedded HTTP server (`httpserver`) and its
request deadlines and connection cap (`httpguard`), atomic file replacement (`atomic_write`), and the
process helpers (`processes`: stop a child in order, a free port, a port probe). It knows no command and
imports no other corral package.
"""
