"""corral.backends"""
