from planc.cli import main

main()
