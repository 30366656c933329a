// A small English corpus for the WordPiece vocabulary of the generated encoder models: everyday
// statements, premise/hypothesis-style pairs, questions and a little technical text. Written for
// this project; its only job is to give the tokenizer whole words for common text.

export const WORDPIECE_CORPUS = `
A man is playing a guitar on the street while people walk past and listen.
A woman is reading a book in the park under a large tree.
Two children are running along the beach with a small brown dog.
The cat is sleeping on the sofa next to the window.
Nobody is playing music; the street is quiet and empty.
A person is outside. Some people are inside the house. The dog is not wet.
The weather this morning was cold and clear, so we walked to the market early.
Fresh bread, apples, cheese and coffee cost less than we expected.
The train leaves at nine and arrives in the city two hours later.
She bought a new car last year because the old one broke down.
He is a doctor who works at the hospital near the river.
They are cooking dinner together in a small kitchen.
The meeting was moved to Tuesday afternoon because the manager was ill.
Every student must finish the exam before the bell rings.
The company reported higher profits and hired more engineers this quarter.
The museum is closed on Mondays and open late on Fridays.
It rained all day, and the football match was cancelled.
The restaurant serves pizza, pasta, soup, salad and fish.
A group of friends is hiking up a steep mountain trail.
The bridge was built over the river more than one hundred years ago.
Premise: the sky is blue and the sun is shining. Hypothesis: it is a sunny day.
Premise: a boy is holding an umbrella in the rain. Hypothesis: the boy is dry and it is snowing.
Premise: the store opens at ten. Hypothesis: customers can shop in the morning.
Is the answer true, false, or unknown? The statement does not follow from the text.
Entailment, contradiction and neutral are the three labels of natural language inference.
The model returns a vector for each sentence, and similar sentences have similar vectors.
Search results are ranked by the similarity between the query and each document.
The server reads the configuration file, loads the models and starts listening for requests.
Send the request with your key in the header; a wrong key is refused with an error.
The database stores accounts, keys, usage and the balance of each account.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 12 20 24 32 50 64 100 128 256 384 512 1000 2048 4096.
What time does the library open on Sunday? Where is the nearest station? How much does it cost?
I think this is a good idea, but we should ask the others first.
The quick brown fox jumps over the lazy dog.
Water boils at one hundred degrees and freezes at zero.
Birds fly south in the autumn and return in the spring.
The teacher explained the lesson again because nobody understood it.
Please write a short summary of the report and send it by email.
`;
