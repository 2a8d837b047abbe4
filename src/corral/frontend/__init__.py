"""corral.frontend"""
