"""Identity: users and the authenticator, permissions, JWT verification, import/export specs (no runtime
state)."""
