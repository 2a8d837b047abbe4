"""corral.loading"""
