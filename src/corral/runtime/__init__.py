"""Process plumbing every corral command shares: periodic loops and the tasks a process owns
(`loops`), the event-loop stall watch (`loopwatch`), the embedded HTTP server (`httpserver`) and its
request deadlines and connection cap (`httpguard`), atomic file replacement (`atomic_write`), and which
startup failures are one line rather than a traceback (`errors`). It knows no command.
"""
