from planc.cli.main import entry

entry()
