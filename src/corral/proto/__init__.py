"""`backend.proto` (the reference's Backend service, with corral's fields from 100) and its generated
stubs; reply helpers shared by both transports.
"""
