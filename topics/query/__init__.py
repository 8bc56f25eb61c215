"""The record filter language (`where`) and the CloudEvents projection."""
