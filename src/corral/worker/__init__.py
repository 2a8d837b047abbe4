"""corral.worker"""
