from pynatsd.cli import main

main()
