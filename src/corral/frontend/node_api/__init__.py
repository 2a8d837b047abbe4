"""The workers' `/api/node/*`: the routes (`routes`), the registration token (`token`), a node's own
credential (`identity`) and who may knock how often (`admission`).
"""
