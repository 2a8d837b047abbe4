"""corral.placement"""
