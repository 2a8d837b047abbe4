"""corral.proto"""
