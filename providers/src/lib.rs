//! Provider adapters, outcome classes and the provider simulator (being built).
