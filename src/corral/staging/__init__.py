"""corral.staging"""
