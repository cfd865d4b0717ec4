"""Tests of fleetd.remedy (a package so module names never clash with other test folders)."""
