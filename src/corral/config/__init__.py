"""corral.config"""
