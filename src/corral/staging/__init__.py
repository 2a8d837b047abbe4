"""File transfer to workers: the frontend's uploader and the worker's receiver and threaded file server
(resumable, sha256 computed by the receiver), S3 and shared-volume modes, Hugging Face snapshots
(`hub_download`), and ephemeral request inputs (audio, images) with their ledger and sweep. It knows
nothing about scheduling.
"""
