"""corral.routing"""
