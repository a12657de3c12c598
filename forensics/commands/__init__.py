"""One module per stage; importing each registers its commands on `forensics.cli.app`."""
