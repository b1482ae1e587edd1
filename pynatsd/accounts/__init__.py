"""Runtime links between accounts (service and stream imports) and the account resolvers."""
