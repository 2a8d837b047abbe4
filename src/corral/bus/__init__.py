"""corral.bus"""
