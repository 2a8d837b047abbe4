"""The operator's command line: `corral nodes`, `corral models`, `corral activity`, `corral models load`.

Each command talks to one frontend over its HTTP API with an admin key (`client`), prints a table
or JSON (`tables`), and follows a load with a progress bar on a terminal, lines otherwise (`progress`).
"""
