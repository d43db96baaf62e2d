"""A throwaway study plugin for the tests: one folder and one entry point line."""
