"""corral.models"""
