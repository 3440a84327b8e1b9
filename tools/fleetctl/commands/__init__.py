"""One module per fleetctl command or command family; each has `run(admin, args) -> int`
(`local` has `run(args)`: it starts its own coordinator). Commands import the shared modules
of tools/fleetctl, never each other and never the parser."""
