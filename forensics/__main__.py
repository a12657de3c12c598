from forensics.cli import app

app(prog_name="forensics")
